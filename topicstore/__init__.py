"""What applications of the topicstore service import: the API's request and response
models (``topicstore.models``) and the Python client (``topicstore.client``). Neither
loads FastAPI, Spark nor the matching engines."""
