"""Cordons: workers no new work lands on. Over base/; the cordon playbook's module (library/ray_cordon.py), a retry
going around the blamed (module_utils/jobs/life/around.py) and up.yml's knobs stand on it.

  cordons.py   one typed file per cordoned worker on the shared root (the truth), and what Ray is told of it: a
               placement group that holds the worker's resources, planned from the file and applied
"""
