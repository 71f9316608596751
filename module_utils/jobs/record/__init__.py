"""A job, its record and the record's model: the floor of jobs/, importing no other package of it.

  status.py     the typed model of a record's status.json (StatusFile) and its states
  record.py     the record directory: layout, locks, atomic writes, reading and saving status.json
  open_index.py the index of records that are not final (jobs/.open/), so no reader walks every record
  retry.py      the one retry rule (whether a failed job's next attempt is due), asked by life/chain.py only (and
                by record.py, which keeps an undecided record in the open index)
  client.py     Ray's job API and state API as jobs/ needs them
  job.py        one job: its client, its record and how to redact what is written or shown
"""
