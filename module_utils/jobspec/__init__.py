"""The JobSpec: its field table (fields.py), the typed model (model.py) and its rendering into Ray's
submission (render.py). Over base/ and verl/."""
