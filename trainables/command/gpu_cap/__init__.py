"""The folder put first on a fractional command trial's PYTHONPATH: its `sitecustomize.py` caps the
GPU memory of the command's Python processes when CUDA starts in them (not imported as a package)."""
