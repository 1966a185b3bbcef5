"""Platform vocabulary shared by the control plane (deploy) and the local platform.

One module per platform: its object names, annotation keys, defaults and limits, so a
renderer, a reconciler and a test never spell them out as literals of their own.
"""
