"""Ports: the driver protocol (protocol), the kit's client of a port's driver
(driver_client), the reference drivers behind ``emq driver`` (reference_driver), and the
script bundle a port loads (bundle)."""
