"""The main job's stages, one module each; `demo.py` chains them."""
