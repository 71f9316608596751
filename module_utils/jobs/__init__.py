"""The ray_job module's work, in packages by concern (library/ray_job.py keeps its documentation and main()). Over
base/, verl/, jobspec/ and cordons/; inside, each package imports only those listed before it
(tests/unit/module_utils/test_layers.py holds every package and sub-package to its layer).

  record/       a job, its record and the record's model: status.json's typed model, the record's folder, the
                index of open records, the retry rule, Ray's job API
  evidence/     what a job leaves behind and what is read from it: the driver's log, verl's metrics, the hang,
                the processes' stacks, the blame, the goodput, the workers' logs, the final record
  submission/   the submit pipeline: the preflight and its kept verdicts, the linked attempts
  life/         the chain's life: one step of a job, the engine after an attempt ends, following, watching,
                going around the blamed, reconciling what a restarted head forgot
  options.py    the module's and its action plugin's options, one table
  runner.py     dispatch of an action and the one-line message of a failure outside it
"""
