"""Devices a node publishes (DRA ResourceSlices) and the claims pods make on them.

Pure domain: what a device is, how a claim's CEL selectors are evaluated against it
(with a maintained CEL library), and how many pods' claims one node of a group can
satisfy. Edges build these from config, PodTemplates and the API."""
