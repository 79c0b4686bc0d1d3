"""engine/ugm"""
