"""The engine behind the sweep scripts: flags, grid, pre-flight checks, the one launcher and its parts."""
