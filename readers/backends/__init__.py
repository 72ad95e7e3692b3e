"""Twin backends: native decoder and PySpark state data sources."""
