"""What the tests share, none of it a test: clusters and servers started by pid (`ray_cluster`, `s3_server`,
`slurm_cluster`), experiments written as Tune writes them (`analysis_fixtures`), sweeps run as a user types them
(`command_sweeps`) and their trials' records (`trial_results`), waiting with a deadline (`processes`), and the
inputs a few tests build (`repos`, `research_record`, `sweep_status`, `recorded`, `tracker_flags`,
`docs_commands`). A test module imports these, never another test module (tests/unit/test_suite_layout.py)."""
