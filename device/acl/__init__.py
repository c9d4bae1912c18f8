"""ctypes bindings to the CANN runtime (libascendcl) and the aclnn op API, and the ``acl:N`` device.

Entry points for the rest of the project:

* :func:`acl_inventory` -- list the NPUs (``[]`` without a CANN runtime);
* :func:`open_acl_device` -- the ``acl:N`` device;
* :func:`open_process_runtime` and the helpers in :mod:`device.acl.raw_checks` -- raw device reads
  for ``ggml:CANN*`` (``device_reader``, ``read_device_bytes``, ``memory_snapshot``); the verdict on
  those bytes is ``conformance/verdict/raw.py``'s.
"""

from device.acl.device import AclDevice, open_acl_device
from device.acl.errors import AclError, AclLibraryNotFound
from device.acl.inventory import acl_inventory, open_runtime
from device.acl.raw_checks import open_process_runtime

__all__ = [
    "AclDevice", "AclError", "AclLibraryNotFound", "acl_inventory", "open_acl_device", "open_process_runtime",
    "open_runtime",
]
