"""Raw tables -> metrics, paired statistics, verdicts and the processed tables (never imports vLLM)."""
