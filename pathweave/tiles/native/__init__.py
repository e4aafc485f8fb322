"""Native code of the execute stage, built by the package's build (setup.py) and loaded via ctypes."""
