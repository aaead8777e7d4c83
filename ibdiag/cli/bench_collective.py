"""(not written yet)"""
