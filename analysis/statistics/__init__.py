"""Statistics over seeds: selection of one value per trial, means and intervals, paired tests, and seeds by
significance."""
