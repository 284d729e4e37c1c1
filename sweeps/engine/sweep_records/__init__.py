"""The sweep's own records: the driver lock (`driver.json`) and the provenance captured at every run."""
