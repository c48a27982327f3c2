"""The web dashboard mqbroker serves on ``dashboardPort``: cluster and broker, topics,
consumer groups, clients (4.x and 5.x) and messages. See docs/dashboard.md."""
