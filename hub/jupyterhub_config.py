# JupyterHub's configuration for `make hub`: read from the state `python -m hub start` writes
# (hub/cli.py): the accounts, the ports, the Python the accounts run.
import json
import os
import pwd
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # hub/, in root's process
from hub.runtime import student_view  # noqa: E402

c = get_config()  # noqa: F821

STATE = Path(os.environ.get("COURSE_HUB_STATE", "/srv/dgl-hub"))
hub = json.loads((STATE / "private" / "hub.json").read_text())
private = STATE / "private"

c.JupyterHub.bind_url = f"http://{hub['ip']}:{hub['port']}"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = hub["hub_port"]
c.JupyterHub.db_url = f"sqlite:///{private / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(private / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(private / "jupyterhub.pid")
c.ConfigurableHTTPProxy.command = [hub["proxy"]]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{hub['proxy_api_port']}"
c.ConfigurableHTTPProxy.pid_file = str(private / "jupyterhub-proxy.pid")
c.JupyterHub.cleanup_servers = True  # the accounts' servers stop with the hub
c.JupyterHub.cleanup_proxy = True

# Real Unix accounts, their passwords checked by PAM (the hub runs as root to do it and to
# start each server as its account).
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.open_sessions = False
c.Authenticator.allowed_users = {hub["instructor"], *hub["students"]}

# The roster service: `make hub-add-student` / `hub-remove-student` add and remove the
# account's JupyterHub user while the hub runs (its token: root's only, in private/).
c.JupyterHub.services = [{"name": "course-roster", "api_token": hub["roster_token"]}]
c.JupyterHub.load_roles = [
    {"name": "course-roster", "scopes": ["admin:users", "admin:servers"],
     "services": ["course-roster"]},
]  # fmt: skip

# Each account's server: JupyterLab, as the account, in its home.
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [hub["python"], "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.environment = {"PATH": f"{Path(hub['python']).parent}:/usr/local/bin:/usr/bin:/bin"}
c.Spawner.start_timeout = 180  # a busy 2-core machine: JupyterLab takes its time
c.Spawner.http_timeout = 180


def in_student_view(spawner):
    """A student's server (and so its terminals and kernels) runs in `student_view`: the
    machine without the checkout, the instructor's course or any other home."""
    name = spawner.user.name
    if name != hub["instructor"]:
        view = student_view(pwd.getpwnam(name).pw_dir, STATE)
        spawner.cmd = [*view, hub["python"], "-m", "jupyterhub.singleuser"]


c.Spawner.pre_spawn_hook = in_student_view
