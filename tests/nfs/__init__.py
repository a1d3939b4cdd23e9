"""NFS test rig: a real nfs-ganesha server and libnfs clients in network namespaces (rig.py),
client workloads (workloads.py) and the tshark oracle for RPC/NFS (oracle.py)."""
