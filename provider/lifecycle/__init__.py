"""The life of the `allset serve` process: how it learns it must stop, and the bound on how
long stopping may take."""
