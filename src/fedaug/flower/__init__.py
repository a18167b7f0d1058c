"""Flower adapter: every fedaug method as a Flower ServerApp / ClientApp (Message API, flwr 1.41).

The only package that imports ``flwr`` (install with ``pip install 'fedaug[flower]'``):

* :mod:`~fedaug.flower.records`: api messages <-> ``RecordDict`` (ArrayRecord, MetricRecord, ConfigRecord);
* :mod:`~fedaug.flower.server_app`: the engine's round loop with client calls sent through Flower's Grid;
* :mod:`~fedaug.flower.client_app`: the method's client side on a node's partition;
  :mod:`~fedaug.flower.client_store`: the node-local store of its client's state between rounds;
* :mod:`~fedaug.flower.simulation`: Flower's simulation runtime; :mod:`~fedaug.flower.deploy`: SuperLink and
  SuperNodes over TLS; :mod:`~fedaug.flower.certs`: a CA and server certificate for them.

Nothing is imported here, so ``import fedaug.flower.certs`` (and ``client_store``) works without flwr.
"""
