"""engine/si"""
