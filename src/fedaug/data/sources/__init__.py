"""Built-in dataset loaders, one module per dataset; the registry imports every module here the first time a
dataset is asked for (:func:`fedaug.registry._ensure_loaded`), which registers them (see
:mod:`fedaug.data.datasets`).

One module per dataset: ``uci_har``, ``mnist``, ``fashion_mnist``, ``cifar10`` (+ ``cifar10_jpeg`` helper),
``cifar100`` (both CIFARs read through ``cifar_pickles``),
``fsdd``, ``urbansound8k`` (+ ``audio_common`` helper) and ``synthetic``; a user's own data in common
formats: ``arrays`` (.npz), ``csv`` (``csv_table``) and ``image_folder`` (+ ``files_common`` helper,
and ``file_groups`` for the group ids of a natural split).
"""
