"""ctypes bindings to the CANN runtime (libascendcl) and the aclnn op API, and the ``acl:N`` device."""
