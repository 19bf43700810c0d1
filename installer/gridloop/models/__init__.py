"""`gridloop models`: make a small causal LM with no hub (making.py), push a model folder
to S3 (pushing.py), and check an object-storage URI (uris.py)."""
