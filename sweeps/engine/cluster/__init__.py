"""Ray start-up and GPUs: starting or joining Ray, choosing and packing GPUs, and what each trial holds."""
