"""What the project knows of verl itself (over base/): its metrics lines, its checkpoints' layout, how its failures
read, and the probe run in a job's own Python."""
