"""shim_k8s"""
