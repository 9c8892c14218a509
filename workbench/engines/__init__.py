"""Engine versions as data (``versions``), and loading an engine's released code for conformance."""
