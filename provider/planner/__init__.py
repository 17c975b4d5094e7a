"""Pure planning: demand + offerings -> the cheapest all-or-nothing plan, or why not."""
