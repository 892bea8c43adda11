"""Targets: what the conformance machine drives beside the model. ``protocol`` declares
the surface every target has."""
