"""Hostile: never finishes importing."""

while True:
    pass
