"""Bringup: the node graph as data, launch files built from it, parameters, and the CLI."""
