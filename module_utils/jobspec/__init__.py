"""The JobSpec, each module over the ones before it: its field table (fields.py), what only the spec sets (owned.py),
the typed model (model.py) and its rendering into Ray's submission (render.py). Over base/ and verl/."""
