"""The floor every other package stands on; it imports none of them.

  conventions.py     the project's names, rules and the shared root's layout (a job record's files included)
  redaction.py       which values are secret, and redacting them from anything written or shown
  files.py           files on the shared root as data of any shape: no symlink followed, caps, atomic writes, locks
  ray_connection.py  the connection options every Ray module shares
  ray_cluster.py     Ray's job, state and dashboard APIs, as the project calls them
  model.py           the one model language: a field declared once (Field), the walk that checks values, the
                     JSON Schema generator (the JobSpec's and status.json's tables)
"""
