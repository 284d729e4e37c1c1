"""Figures: learning curves, the metric against noise rate, heatmaps, confusion matrices, the timeline and search
plots."""
