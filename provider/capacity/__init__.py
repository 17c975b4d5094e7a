"""What capacity there is to plan with: each group's offerings (reservations, on-demand,
spot) as data, the ledger that claims and holds reservation slots so none is promised
twice, and the offerings a capacity failure marked unavailable for a while."""
