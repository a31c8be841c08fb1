"""The device-neutral kernel IR and the one decoder of its results."""
