"""The native recorder's C++ source (recorder.cpp), built and driven by native_recorder.py.

A package only so that `python -m collcheck.runtime.native build`, the command the README gives
for building the recorder ahead of time (a container image's build step), keeps working: its
`__main__` runs native_recorder's. New code imports `collcheck.runtime.native_recorder`.
"""
