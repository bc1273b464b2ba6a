"""A stand-in for an installed training library (accelerate and the like): test_library_sites.py
copies this package into a folder named site-packages, so every frame of its jobs is library code."""
