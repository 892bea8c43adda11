"""Targets of the non-default layouts (specs/layouts/): each drives its layout's scripts
on a server and reads back the layout's projection."""
