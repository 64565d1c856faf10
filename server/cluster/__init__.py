"""Team scale: the engine behind Ray Serve replicas (`redraft cluster`).

batcher.py shares one engine among many callers, batching their requests together (no Ray);
app.py is the Ray Serve application (an ingress made of the HTTP API and the engine protocol's
routes over a BatchingEngine); command.py starts, watches and tears down a deployment. Ray is
imported only by app.py and command.py, and only the `cluster` command imports them.
"""
