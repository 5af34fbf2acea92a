module gpuroster/goclient

go 1.22
