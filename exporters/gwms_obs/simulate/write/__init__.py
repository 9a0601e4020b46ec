"""One writer per factory file format, each named after the reader in ``gwms_obs.sources`` it feeds."""
