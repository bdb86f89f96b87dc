"""The topicstore application: command line now, the service and its wiring later."""
