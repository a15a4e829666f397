#!/bin/sh
# total.sh SUBTOTAL TAX_PERCENT prints the invoice total in cents.
echo $(( $1 + $2 ))
