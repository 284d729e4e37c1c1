"""`--seeds auto`: its flags, and the Tune searcher that suggests seeds where a comparison is still open."""
