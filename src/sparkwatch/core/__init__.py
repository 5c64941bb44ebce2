"""The pure measurement core: no asyncio, aiohttp, asyncssh, sqlite3, pynvml or psutil here.

Every number in an export is decided by functions in this package (filled by the coordinator issue).
"""
