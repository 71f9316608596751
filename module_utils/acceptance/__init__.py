"""A site's acceptance run (acceptance.yml): is the cluster fit for work. Over base/.

  judgement.py   the site acceptance's judgement, from the measuring job's raw times and the jobs' records
  report.py      the acceptance's per-node table, its record and JUnit XML
"""
