module github.com/cove-sandbox/cove

go 1.26.8
