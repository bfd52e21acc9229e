#!/usr/bin/env python3
"""A TCP forwarder on 127.0.0.1: the mirror soak's replication link, which
it kills for a partition and starts again for the heal.

Usage: proxy.py LISTEN_PORT TARGET_PORT
"""
import asyncio
import sys

listen, target = int(sys.argv[1]), int(sys.argv[2])


async def pipe(reader, writer):
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def handle(reader, writer):
    try:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
    except OSError:
        writer.close()
        return
    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", listen, reuse_address=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
