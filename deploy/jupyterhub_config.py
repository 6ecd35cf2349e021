"""JupyterHub on one machine for the SGEMM course (tests/test_jupyterhub_term.py runs this file).

The hub runs as root and starts each user's JupyterLab as that user's own Unix
account (LocalProcessSpawner), which is how nbgrader's exchange tells students
apart: by the account name of the process that fetches or submits. Students'
homes must be private (mode 700): the instructor's home holds the course's
answers. Start it with `jupyterhub -f /etc/jupyterhub/jupyterhub_config.py`
from the Python environment that has the course installed (deploy/README.md).
"""
import os
import sys

c = get_config()  # noqa: F821  (JupyterHub provides it)

# ---- who logs in: REPLACE with your site's authentication -----------------------------------
# PAM: the machine's own Unix accounts and passwords. An OAuthenticator or LDAPAuthenticator
# also works, as long as each hub user name is a Unix account on this machine.
c.JupyterHub.authenticator_class = "pam"
c.LocalAuthenticator.allowed_groups = {"sgemm-lab"}     # the class and its instructors: a Unix group
c.Authenticator.admin_users = {"instructor"}            # the instructors' user names

# ---- where the hub keeps its state -------------------------------------------------------------
c.JupyterHub.bind_url = "http://:8000"                  # put TLS in front (a reverse proxy), or ssl_cert/ssl_key
c.JupyterHub.db_url = "sqlite:////srv/jupyterhub/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "/srv/jupyterhub/jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.pid_file = "/srv/jupyterhub/jupyterhub-proxy.pid"

# ---- each user's JupyterLab ----------------------------------------------------------------
# The hub's own Python environment (the course package, nbgrader, JupyterLab), for every user:
# its folder must be readable by all (not under /root), and its bin/ comes first on the PATH of
# the users' terminals, where the instructor runs nbgrader and `python -m grader autograde`
# (a plain bash: a login shell would take the PATH from /etc/profile).
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.args = ['--ServerApp.terminado_settings=shell_command=["/bin/bash"]']
c.Spawner.environment = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin",
                                                  "/bin"])}
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120                           # a first JupyterLab start on a busy machine
c.Spawner.http_timeout = 120
