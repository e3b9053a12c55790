"""ember.backends.reference: a minimal delegate that runs float32 add / mul / linear subgraphs.

It exists to prove (and test) the delegate interface end to end and as a small example for backend
authors: `ReferencePartitioner` picks the nodes, `ReferenceBackend.preprocess` packs them (weights
included) into a blob, and the C++ backend `ember.reference` (runtime/reference_backend.cpp)
interprets the blob.
"""

from ember.backends.reference.partitioner import ReferenceBackend, ReferencePartitioner

__all__ = ["ReferenceBackend", "ReferencePartitioner"]
