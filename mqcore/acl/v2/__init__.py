"""ACL 2.0 (Apache RocketMQ 5.3): users, ACL rules, authentication and authorization of requests.

Modules: ``model`` (users, resources, policies, the decision), ``store`` (``config/auth.json``,
reloaded when it changes), ``check`` (a remoting request: who, and may they), ``admin`` (the
AUTH_* requests 3001-3010). See docs/ACCESS_CONTROL.md.
"""
