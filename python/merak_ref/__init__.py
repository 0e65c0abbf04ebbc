# Plain-PyTorch reference implementations of Merak's models, written from the architecture (not
# from our code), for parity tests and speed comparisons. Run with /usr/bin/python3 (Debian's
# python3-torch).
