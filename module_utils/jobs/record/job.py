"""One job as an action sees it: its Ray client, its record, and how to redact what is written or shown."""

from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.base.redaction import is_secret_name, redact
from ansible.module_utils.jobs.record.client import JobClient
from ansible.module_utils.jobs.record.record import Record


class Failed(Exception):
    """Ends an action with module.fail_json(msg, **result)."""

    def __init__(self, msg, **result):
        super().__init__(msg)
        self.result = result


class Job:
    """One job: its client, its record, the secrets to hide in any text (logs, commands) and its result."""

    def __init__(self, module, config, sid, output_dir, client=None):
        self.module = module
        self.config = config
        self.sid = sid
        self.record = Record(output_dir, sid)
        self.rec = self.record.path
        token = rc.read_token(module.params["token_path"])
        self.client = client or JobClient(config.dashboard_url, token)
        self.secret_names = tuple(config.secret_env_names)
        self.secrets = [token] if token else []

    @property
    def changed(self):
        return self.record.changed

    def learn_secrets(self, runtime_env):
        """Remember the job's secret env values, so they are hidden inside any text (logs, commands)."""
        env_vars = (runtime_env or {}).get("env_vars") or {}
        self.secrets += [v for k, v in env_vars.items() if is_secret_name(k, self.secret_names) and v]

    def redact(self, obj):
        return redact(obj, self.secret_names, extra_values=self.secrets)

    def info(self):
        """Ray's JobInfo, or None when Ray does not know the id."""
        info = self.client.info(self.sid)
        if info is not None:
            self.learn_secrets(getattr(info, "runtime_env", None))
        return info

    def status(self):
        return self.record.status()

    def save_status(self, status, files=None):
        return self.record.save_status(status, files)

    def result(self, status, progress, **extra):
        return dict(changed=self.changed, submission_id=self.sid, state=status.state, done=status.final,
                    record=self.rec["dir"], status=status.to_dict(), progress=self.redact(progress), **extra)
