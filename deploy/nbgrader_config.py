"""nbgrader's configuration for every user of the hub: /etc/jupyter/nbgrader_config.py.

The exchange is the folder through which the instructor releases assignments
and feedback and students submit: one folder on the machine (or, on a cluster,
one shared volume mounted at this path in every user's server). Create it once,
writable by all: `mkdir -p /srv/nbgrader/exchange && chmod 777 /srv/nbgrader/exchange`;
nbgrader makes the course's folders inside it with the right permissions.
The course id and the graders' settings come from the course's own
nbgrader_config.py, in the instructor's course folder.
"""
c = get_config()  # noqa: F821  (nbgrader provides it)

c.Exchange.root = "/srv/nbgrader/exchange"
