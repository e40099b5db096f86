"""The raw-table contract both sides share: the tables' schemas, trial naming, writing and reading a trial's raw folder."""
